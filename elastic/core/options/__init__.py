"""The options of ``elastic run``: the table, what values they take, the frozen ``RunConfig``, their text."""
