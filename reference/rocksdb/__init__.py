"""The embedded RocksDB (`rocksdb`) state backend on rocksdict: one column family per state, keys laid out so
each key group is a contiguous range, full (canonical), incremental and native snapshots."""
