"""The built-in update rules, one module each (registered by name: workflow/algos/registry.py)."""
