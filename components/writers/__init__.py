"""Writers: embedded chunks into the knowledge store."""
