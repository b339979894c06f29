module github.com/limitgen/limitgen/schema

go 1.26.0

require (
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	go.yaml.in/yaml/v3 v3.0.4
)

require golang.org/x/text v0.14.0 // indirect
