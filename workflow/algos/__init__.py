"""Framework-agnostic torch: losses (GRPO family, SFT) and update rules. Used by every engine."""
