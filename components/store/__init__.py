"""The knowledge collection in Milvus (schema, reader, writes, BM25 terms) and the knowledge index file."""
