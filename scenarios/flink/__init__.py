"""The scenario runner on Apache Flink itself (`statecert scenario run --runner flink`, extra `statecert[flink]`)."""
