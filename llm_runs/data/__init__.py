"""Datasets for the LLM track that are not generated in-process (GSM8K)."""
