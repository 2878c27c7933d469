"""PyTorch backend: one process per GPU, DDP, the GAN loop; besides the shared modules,
`rng` (the RNG streams a checkpoint carries) and `payload` (loading a checkpoint's tensors).
"""
