package acemqtest

// The images package acemqtest/container starts when no broker or database
// answers in the environment or on this machine.
const (
	// RabbitMQImage is the RabbitMQ image started unless
	// $ACEMQ_RABBITMQ_IMAGE names another.
	RabbitMQImage = "rabbitmq:3.13-alpine"
	// PostgresImage is the PostgreSQL image started unless
	// $ACEMQ_POSTGRES_IMAGE names another.
	PostgresImage = "postgres:16-alpine"
)
