"""Training for any model family of the kit that writes a backward pass (gpt2.model.GPT2 does).

* step: one training step on the kit's host functions: forward, the loss, backward, AdamW.
* data: batches of a training text (inputs, and the targets one token on).
"""
