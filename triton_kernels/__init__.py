"""Triton softmax variants: one module each, a @triton.jit kernel and its wrapper."""
