"""Raise ValueError('loss went NaN at step 7') inside elastic.errorfile.record."""

from elastic.errorfile import record


@record
def main() -> None:
    raise ValueError("loss went NaN at step 7")


main()
