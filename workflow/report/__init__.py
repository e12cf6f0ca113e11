"""`rlsweep report`: a sweep's report from its tables (build.py is the entry point)."""
