package io.dataflow.streaming;

import io.dataflow.local.HardLinkLogStore;
import io.dataflow.s3.ConditionalPutLogStore;
import io.delta.storage.LogStore;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

/**
 * Structured Streaming's checkpoint files ({@code spark.sql.streaming.checkpointFileManagerClass})
 * with an exclusive create across processes: a stream batch's offsets file ({@code offsets/N},
 * the batch's plan) and commit file are made by the product's log store for the path's scheme,
 * the same create its Delta commits use (a hard link on {@code file:}, a PUT with
 * {@code If-None-Match: *} on S3). Of two processes planning batch N at once, one creates
 * {@code offsets/N} and the other gets {@link FileAlreadyExistsException}, upon which Spark
 * stops its query as a concurrent one; the next run reads the plan the first one made.
 *
 * <p>Why: Spark's default creates the file with a check that it is absent and then a rename
 * (FileContext's, or S3A's copy), so both processes can pass the check and the second plan
 * replaces the first: two different batch N. Files Spark overwrites on purpose, and paths
 * on other stores, are Spark's own.
 */
public class ExclusiveCheckpointFileManager extends FileContextBasedCheckpointFileManager {

  private final Configuration hadoopConf;

  public ExclusiveCheckpointFileManager(Path path, Configuration hadoopConf) {
    super(path, hadoopConf);
    this.hadoopConf = hadoopConf;
  }

  @Override
  public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    LogStore store = overwriteIfPossible ? null : storeFor(path, hadoopConf);
    if (store == null) {
      return super.createAtomic(path, overwriteIfPossible);
    }
    return new Exclusive(new ByteArrayOutputStream(), path, store, hadoopConf);
  }

  /** The product's log store for the path's scheme; null where Spark's own create serves. */
  static LogStore storeFor(Path path, Configuration conf) {
    String scheme;
    try {
      scheme = path.getFileSystem(conf).makeQualified(path).toUri().getScheme();
    } catch (IOException e) {
      return null;
    }
    if ("file".equals(scheme)) {
      return new HardLinkLogStore(conf);
    }
    if ("s3a".equals(scheme) || "s3".equals(scheme)) {
      return new ConditionalPutLogStore(conf);
    }
    return null;
  }

  /** The file's content, kept until close, then created whole, exclusively, by the store. */
  static final class Exclusive extends CheckpointFileManager.CancellableFSDataOutputStream {
    private final ByteArrayOutputStream buffer;
    private final Path path;
    private final LogStore store;
    private final Configuration conf;
    private boolean done;

    Exclusive(ByteArrayOutputStream buffer, Path path, LogStore store, Configuration conf) {
      super(buffer);
      this.buffer = buffer;
      this.path = path;
      this.store = store;
      this.conf = conf;
    }

    @Override
    public void cancel() {
      done = true;
    }

    @Override
    public void close() throws IOException {
      if (done) {
        return;
      }
      done = true;
      flush();
      String text = new String(buffer.toByteArray(), StandardCharsets.UTF_8);
      // the store writes each line with a newline after it; Spark reads the lines back
      List<String> lines = new ArrayList<>(Arrays.asList(text.split("\n", -1)));
      if (!lines.isEmpty() && lines.get(lines.size() - 1).isEmpty()) {
        lines.remove(lines.size() - 1);
      }
      try {
        store.write(path, lines.iterator(), false, conf);
      } catch (java.nio.file.FileAlreadyExistsException e) {
        FileAlreadyExistsException taken = new FileAlreadyExistsException(path + " exists: another process made it");
        taken.initCause(e);
        throw taken;
      }
    }
  }
}
