"""The ``sporch`` command line. ``main.COMMANDS`` maps command names to their modules."""
