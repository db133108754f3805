"""The subcommands of ``pypto-tune``: one module each, with ``add_arguments(parser)`` and
``run(namespace) -> int`` (``autotune/cli.py`` holds the table of them)."""
