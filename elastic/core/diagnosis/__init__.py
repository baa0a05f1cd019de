"""Why a rank failed, read from what it said: failure signatures and their classes. Pure.

:mod:`elastic.core.diagnosis.signatures` holds the rule table (data: an id, a class, a
pattern and its conditions per row), the one matcher over a rank's log tail, error file
and exit status, and the parser of users' own rules (``--signature REGEX=CLASS``).
"""
