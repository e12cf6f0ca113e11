"""What the rest of rlsweep knows of an engine, and what an engine implements: its traits (traits.py: light, asked
by name, never compared with it), the registry of engines by name (registry.py), the table of what each can do
(capabilities.py) and the protocol of the trainer a stage job drives (protocol.py). The engines themselves live in
workflow/engines/ and import this; nothing here imports them (they are loaded by name)."""
