"""The command line: the grammar, layering of flags, environment and file,
the subcommands, and :func:`elastic.cli.main.main` (the ``elastic`` script).

Empty on purpose: ``import elastic.cli`` loads nothing else.
"""
