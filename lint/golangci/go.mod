module github.com/pgadvisory/pgadvisory/lint/golangci

go 1.25.0

require (
	github.com/golangci/plugin-module-register v0.1.2
	github.com/pgadvisory/pgadvisory/lint v0.1.0
	golang.org/x/tools v0.49.0
)

require (
	github.com/pgadvisory/pgadvisory v0.1.0 // indirect
	github.com/pganalyze/pg_query_go/v6 v6.2.5 // indirect
	github.com/tetratelabs/wazero v1.12.0 // indirect
	github.com/wasilibs/go-pgquery v0.0.0-20260728010200-155ebad2880e // indirect
	github.com/wasilibs/wazero-helpers v0.0.0-20250123031827-cd30c44769bb // indirect
	golang.org/x/sys v0.47.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
