"""What every layer shares and none owns: the result contract, the similarity scale, term matching, embedding models."""
