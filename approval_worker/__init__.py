"""The one installed command, ``approval-worker``: every entry point behind one name."""
