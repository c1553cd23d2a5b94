"""What the tests and the benchmarks share, so neither keeps its own copy: throwaway databases
(a SQLite file or a Postgres schema), a clean worker environment, free ports, the webhook app
run under uvicorn as its own process, and Svix-signed deliveries. Not imported by the product."""
