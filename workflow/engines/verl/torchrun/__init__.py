"""What runs under torchrun, one process per rank: verl's SFT trainer with our train_steps rows (sft_trainer.py) and
the integrity preflight's child (preflight.py). Touches verl only through names listed in ../seam.py."""
