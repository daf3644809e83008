"""Upstream corpora and fine-tuning tasks: the demo generator, readers for user data, sharding."""
