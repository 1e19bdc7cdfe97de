"""One module per subcommand, each a Command with prepare_parser(parser) and run(args) -> int."""
