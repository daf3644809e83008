"""Sample-wise correctness of upstream items (Harmon et al.): each item scored right or wrong
(`items`), the transitions base -> task as matrices and rates (`transitions`), and the low-rank structure
of the 1->0 matrix Y beside Z's (`lowrank`)."""
