"""How it is simulated: the driver, the layers, the SDE schemes, the exact samplers."""
