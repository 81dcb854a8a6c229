module github.com/ospreystore/osprey

go 1.26

tool google.golang.org/protobuf/cmd/protoc-gen-go

require (
	github.com/spf13/cobra v1.10.2
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
