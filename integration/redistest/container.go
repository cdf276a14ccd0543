package redistest

import (
	"context"
	"fmt"
	"net"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// startContainer starts redis:7 in Docker through testcontainers-go.
func startContainer(ctx context.Context) (s *Server, err error) {
	// testcontainers panics on some provider setups without a daemon;
	// turn that into an error so Start can report all three ways.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("redistest: docker: %v", r)
		}
	}()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        "redis:7-alpine",
			ExposedPorts: []string{"6379/tcp"},
			WaitingFor:   wait.ForLog("Ready to accept connections"),
		},
		Started: true,
	})
	if err != nil {
		if c != nil {
			_ = c.Terminate(ctx)
		}
		return nil, fmt.Errorf("redistest: docker: %w", err)
	}
	host, err := c.Host(ctx)
	if err != nil {
		_ = c.Terminate(ctx)
		return nil, fmt.Errorf("redistest: docker: %w", err)
	}
	port, err := c.MappedPort(ctx, "6379/tcp")
	if err != nil {
		_ = c.Terminate(ctx)
		return nil, fmt.Errorf("redistest: docker: %w", err)
	}
	return redisserver.External(net.JoinHostPort(host, port.Port()), "container", func(ctx context.Context) error {
		return c.Terminate(ctx)
	}), nil
}
