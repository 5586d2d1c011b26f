from trainforge.cli import entry

entry()
