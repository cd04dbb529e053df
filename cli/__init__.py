"""The `vtx` command line: one thin module per subcommand (installed as the package `vtx_cli`)."""
