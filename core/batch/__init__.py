"""What one batch is, apart from the engine: its units and the loop over them, its plan, the incremental-or-whole
choice, the freshness deferral, its journal, its records (ledger, dead letters) and its result."""
