"""Verified self-training (expert iteration): sample answers to problems that have none, keep the
ones the verifier passes, tune on the original data plus everything kept, and repeat.

``keep`` decides what a round keeps (deduplicated, at most M per problem); ``loop`` runs the
rounds, resumably, and writes each round's metrics and the kept samples as a training file.
"""
