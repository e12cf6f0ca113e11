"""What verl 0.9.1 expects of its environment that ours differs in, loaded by verl by name in every process:
vLLM builds (vllm_compat.py, every device) and the CPU platform with vLLM's CPU build (cpu.py, engine.verl.device
cpu)."""
