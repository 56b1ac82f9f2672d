"""The command line, one module per command group (as pip's ``commands/``): each adds its parsers and maps its
command names to thin functions that parse nothing further and call the module that does the work.

``kernodeck.__main__`` parses (:func:`kernodeck.cli.dispatch.build_parser`), calls
(:func:`kernodeck.cli.dispatch.dispatch`) and is the one error boundary. Each command imports what it uses when it
runs: ``--help`` or ``lock --check`` must not pay for verify's, rebuild's and the pylock's imports (measured with
``python -X importtime -m kernodeck lock --check``).
"""
