"""Which checkpoint a run resumes from: names, whole files and directories, and the pick of the latest."""
