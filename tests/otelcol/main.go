// Program otelcol is the OpenTelemetry Collector strobe's tests and docs/fleet.md use: the
// OTLP receiver, the OTLP (gRPC and HTTP), debug and file exporters, and the env, file and
// yaml config providers, as the collector's builder would assemble them. Profiles need
// `--feature-gates=service.profilesSupport`.
package main

import (
	"os"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/otelcol"
)

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol",
			Description: "OpenTelemetry Collector for strobe's OTLP profiles tests",
			Version:     "0.161.0",
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		// cobra has printed the error.
		os.Exit(1)
	}
}
