"""What a project declares: [tool.kernodeck] (schema, loading), its platforms and variants,
its application, and `kernodeck init`."""
