"""Rules only the model-graph layer can report (hooklint.graph)."""
