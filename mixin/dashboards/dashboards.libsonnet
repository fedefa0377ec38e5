(import 'overview.libsonnet')
