"""Insight: analysis computed once, as rows arrive, into typed columns and rows that pages and
reports only read. Sits after the store in the import order (it reads the store through its named
queries) and before capture (which fingerprints each request as it records it).

- `prefix`: a request's cacheable prefix as block-level hashes;
- `verdicts`: why each call read the prompt cache or missed it (the lineage rule is written there);
- `compaction`: compactions inferred from raw traffic, matched to the ones agents report;
- `ingest`: all of it for one batch, as `workbench.store.ingest` writes it."""
