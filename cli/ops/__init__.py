"""The operations: what a command does, between parsing its options and rendering.

Each operation takes the application context (`AppContext`) and plain values, calls the
pure core and the edges, and returns what happened; it prints nothing and imports neither
typer nor rich. Progress goes through callbacks the command passes in.
"""
