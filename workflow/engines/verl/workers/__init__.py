"""What runs in verl's FSDP workers (one Ray actor per rank; Ray imports actor.py there, named by the contract):
our worker classes (actor.py), our update rules around verl's engine step (rule_step.py), the mixed-policy loss
(mix_loss.py). Touches verl only through names listed in ../seam.py."""
