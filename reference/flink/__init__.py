"""Reading snapshots written by Apache Flink itself (2.x): its `_metadata` files and its keyed state streams,
decoded with Python stand-ins for Flink's built-in serializers. Nothing here runs Java, unpickles or deserializes a
Java object: a serializer the reader does not know gives an undecodable column named after its class."""
