"""The GANTrainingJob API (kubegan.io/v1alpha1) and the contract between the operator and the
trainer: the one package both import, and which imports neither.

Pure pydantic and the standard library: `kubegan validate`, the operator and the trainer all
load it without torch, tensorflow or a Kubernetes client.
"""
