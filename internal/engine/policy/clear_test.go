package policy

import "fmt"

// Test helpers: the lab never clears an engine (it applies a new rendering, an empty one when
// no policy is left, and deletes the namespace at the end); the tests do.

// ClearIPTables removes everything ApplyIPTables installed with that backend in the namespace:
// the FORWARD hook, the engine's chains and the sets they used. Idempotent.
func ClearIPTables(nsPath string, backend string) error {
	return ApplyIPTables(nsPath, backend, nil, nil)
}

// ClearNFTables removes the engine's table from the namespace. Idempotent.
func ClearNFTables(nsPath string) error {
	return ApplyNFTables(nsPath, []byte(fmt.Sprintf("table ip %s\ndelete table ip %s\n", NFTablesTable, NFTablesTable)))
}
