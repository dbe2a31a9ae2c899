"""The command line: the parser and entry point, what each command does, the packages a command needs."""
