// Package pgstore will enforce limitgen's shared rules on PostgreSQL (issue 9,
// in progress): so far it holds only internal/pgtest, which starts the
// PostgreSQL servers its tests need.
package pgstore
