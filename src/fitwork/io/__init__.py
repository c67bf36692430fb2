"""Input and output: reading inputs (`inputs`, `readers`, `formats`, `fs`, `shards`,
`unreadable`) and writing outputs (`writers`), with the journal that makes a run
resumable (`journal`) and the runs that write their own outputs (`journaled`)."""
