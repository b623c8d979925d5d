"""The probe's sections, a module each: its section name, its bounds and its parser.

The shared bounds, the line reader and FactsParseError are cli/facts/parse.py's; the
sections still there (memory, GPUs, MIG, topology, shard records, listening ports) move
here one by one."""
