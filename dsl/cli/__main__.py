"""``python -m dsl.cli``: the ``plan`` program (:func:`dsl.cli.program.console_main`)."""
from dsl.cli.program import console_main

if __name__ == "__main__":  # pragma: no cover
    console_main()
