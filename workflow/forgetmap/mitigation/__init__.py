"""Forgetting less: replay selection and mixtures, token masks and example weights, and the paired
statistics that judge mitigation arms on held-out, never-replayed upstream examples."""
