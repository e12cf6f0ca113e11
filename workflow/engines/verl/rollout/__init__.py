"""What runs in verl's agent-loop and reward workers: the seeded single-turn agent loop (agent_loop.py) and the
reward verl calls on every response (reward.py). A method's own loop lives in its folder
(workflow/methods/prefix_rft/verl.py). Touches verl only through names listed in ../seam.py."""
