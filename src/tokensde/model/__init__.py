"""What is simulated, torch-free: parameters, validation and the strategy families."""
