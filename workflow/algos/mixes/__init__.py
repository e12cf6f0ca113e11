"""The mixed-policy methods, one module each (workflow/algos/mix.py is the interface)."""
