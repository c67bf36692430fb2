"""The `fitwork` command's commands, one module per group; `fitwork.cli` assembles them."""
