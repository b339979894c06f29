package slotlimits

// slotlimits.go beside this file is generated from
// limitgrpc/testdata/slots.yaml: `make generate` regenerates it (go generate,
// over every module) and `make check` fails when it is stale (.ci/generated
// -check).

//go:generate go run -C ../../.. ./gen -policy limitgrpc/testdata/slots.yaml -out limitgrpc/internal/slotlimits
