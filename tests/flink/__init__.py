"""Differential tests against Apache Flink itself (`tox -e flink`): the same questions asked of statecert and of
Flink's own classes in a JVM, over generated inputs."""
