"""`python -m fitwork`: the command line, as the `fitwork` script runs it."""

from fitwork.cli import main

main()
